#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
jq '.server.port = 8081 | .server.tls = true' config.json > config.new && mv config.new config.json
