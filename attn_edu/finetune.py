"""Moved to :mod:`attn_edu.experiments.finetune`; this name keeps old imports working."""

import sys

from attn_edu.experiments import finetune as _experiment

sys.modules[__name__] = _experiment
