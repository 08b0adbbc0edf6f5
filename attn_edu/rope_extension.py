"""Moved to :mod:`attn_edu.experiments.rope_extension`; this name keeps old imports and ``python -m attn_edu.rope_extension`` working."""

import sys

from attn_edu.experiments import rope_extension as _experiment

if __name__ == "__main__":
    sys.exit(_experiment.main())
sys.modules[__name__] = _experiment
