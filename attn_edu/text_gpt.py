"""Moved to :mod:`attn_edu.experiments.text_gpt`; this name keeps old imports and ``python -m attn_edu.text_gpt`` working."""

import sys

from attn_edu.experiments import text_gpt as _experiment

if __name__ == "__main__":
    sys.exit(_experiment.main())
sys.modules[__name__] = _experiment
