"""``python -m multiturn_envs.cli``."""

import sys

from multiturn_envs.cli.app import main

sys.exit(main())
