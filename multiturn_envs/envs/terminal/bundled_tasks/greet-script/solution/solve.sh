#!/bin/bash
# The reference solution, one command per turn: "# --- next turn ---" separates the
# turns (multiturn-envs' expert sends them one by one; as a script they run in order).
printf '#!/bin/bash\necho "Hello, ${1:-world}!"\n' > greet.sh
# --- next turn ---
chmod +x greet.sh
