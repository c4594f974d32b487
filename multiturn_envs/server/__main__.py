"""``python -m multiturn_envs.server ENV_ID [...]``: the same as ``multiturn-envs serve``."""

import sys

from multiturn_envs.server.serve import main

if __name__ == "__main__":
    sys.exit(main())
