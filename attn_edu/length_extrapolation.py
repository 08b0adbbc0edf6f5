"""Moved to :mod:`attn_edu.experiments.length_extrapolation`; this name keeps old imports working."""

import sys

from attn_edu.experiments import length_extrapolation as _experiment

sys.modules[__name__] = _experiment
