"""Moved to :mod:`attn_edu.experiments.alignment`; this name keeps old imports working."""

import sys

from attn_edu.experiments import alignment as _experiment

sys.modules[__name__] = _experiment
