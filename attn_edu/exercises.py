"""``python -m attn_edu.exercises build``: the exercise generator at its public name (see :mod:`attn_edu.grading.generate`)."""

import sys

from attn_edu.grading.generate import main

if __name__ == "__main__":
    sys.exit(main())
