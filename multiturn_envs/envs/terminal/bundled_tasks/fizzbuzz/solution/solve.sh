#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
cat > fizzbuzz.py <<'EOF'
import sys

for i in range(1, int(sys.argv[1]) + 1):
    out = ('Fizz' if i % 3 == 0 else '') + ('Buzz' if i % 5 == 0 else '')
    print(out or i)
EOF
