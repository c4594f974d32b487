#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
printf 'build:\n\tmkdir -p out\n\tcat $(sort $(wildcard src/*.txt)) > out/all.txt\n\nclean:\n\trm -rf out\n\n.PHONY: build clean\n' > Makefile
