"""The checks behind the graded exercises, one module per concept.

Importing this package registers every exercise with :mod:`attn_edu.grading`. A notebook that adds
exercises adds a module here (``attn_edu/checks/<concept>.py``) and imports it below.
"""

from attn_edu.checks import (
    architectures,  # noqa: F401  (exercises 09.*)
    attention,  # noqa: F401  (exercises 02.*)
    blocks,  # noqa: F401  (exercises 08.*)
    efficient,  # noqa: F401  (exercises 11.*)
    flash,  # noqa: F401  (exercises 12.*)
    interp,  # noqa: F401  (exercises 13.*)
    kv_cache,  # noqa: F401  (exercises 10.*)
    masks,  # noqa: F401  (exercises 04.*)
    multihead,  # noqa: F401  (exercises 05.*)
    positional,  # noqa: F401  (exercises 06.*)
    retrieval,  # noqa: F401  (exercises 01.*)
    rope,  # noqa: F401  (exercises 07.*)
    scaling,  # noqa: F401  (exercises 03.*)
)
