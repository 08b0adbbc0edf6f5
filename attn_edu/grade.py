"""``python -m attn_edu.grade``: the grading command, kept at its public name (see :mod:`attn_edu.grading.command`)."""

import sys

from attn_edu.grading.command import main

if __name__ == "__main__":
    sys.exit(main())
