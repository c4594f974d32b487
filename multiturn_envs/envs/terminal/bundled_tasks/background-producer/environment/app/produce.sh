#!/bin/bash
: > out.txt
for i in $(seq 1 50); do echo "line $i" >> out.txt; sleep 0.04; done
