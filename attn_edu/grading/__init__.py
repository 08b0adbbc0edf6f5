"""Graded exercises: run a learner's function, compare it with the ``attn_edu`` reference, say what went wrong.

In an exercise notebook::

    from attn_edu.grading import check, hint
    check("02.1", attention_weights)      # a green or red line; never raises in a notebook
    hint("02.1")                           # first hint; hint("02.1", 2) gives the next one

A check calls the learner's function on several random cases (``T != S``, sizes that are not powers of
two, odd head counts) and stops at the first stage that fails, in this order: the call itself (not
attempted, error, timeout), type (a plain ``torch.Tensor``), shape, dtype, NaN/inf, values against the
reference, then the exercise's properties (each tested on its own cases, e.g. a fully masked query row).
When values differ, the output is compared with known-wrong versions (missing ``1/sqrt(D)``, softmax over
the wrong dim, off-by-one causal mask, ...) so the message can name the likely mistake.

Each exercise is an :class:`~attn_edu.grading.exercise.Exercise` listed by a module of
:mod:`attn_edu.grading.checks` (one per concept). The comparison, :func:`~attn_edu.grading.judge.judge`,
works on plain tensors only, so ``python -m attn_edu.grade`` reuses it on numbers sent back from a separate
process, where the learner's code cannot reach it.

An exercise is to be written with torch operations. A learner's function that reaches into ``attn_edu``
itself (the reference it is compared with, or any other of the package's functions and classes, however
wrapped: ``torch.no_grad()``, ``functools.partial``, an ``nn.Module``) fails with a message naming what it
called (:func:`~attn_edu.grading.run.watch_shortcuts`); the parts an exercise hands out
(:mod:`~attn_edu.grading.given`) may be used as intended. What the grading command guarantees on top, and
what it does not try to stop, is the README's "Grading: what a grade guarantees".

``ATTN_EDU_STRICT=1`` turns every result other than PASS into an ``AssertionError`` (the solutions'
nbval run uses it, so a solution that stops passing fails the test suite).

The package, from the notebook's side to the instructor's:

========================= ================================================================================
``notebook.py``           ``check`` and ``hint``, re-exported here (the notebook face)
``result.py``             ``Status``, ``CheckResult``, ``Hint``: what a check returns and how it displays
``answers.py``            a concept question's first answer: kept beside the notebook, saved in its outputs
``exercise.py``           the records: ``Case``, ``Mistake``, ``Property``, ``Exercise``
``checks/<concept>.py``   one module per notebook: cases, reference, wrong versions, hints; ``EXERCISES``
``registry.py``           the explicit list of check modules; ``exercises()``, ``get_exercise()``
``run.py``                running learner code: time limit, one thread, the watch for calls into the package
``judge.py``              outcomes to a result: shape, dtype, NaN, values, named mistakes, properties
``given.py``              what an exercise hands the learner (``toy_sublayers``): no answers, importable when graded
``bounds.py``             Triton's interpreter watched: stray loads and stores, loads and stores recorded
``traffic.py``            ``show_traffic``: a learner's attention kernel drawn as it ran, wrong accesses in red
``protocol.py``           the messages between the command and its worker, both halves
``worker.py``             the child process that runs one learner notebook, without the answer key
``sandbox.py``            bubblewrap's sandbox for it: no network, no other files, the answer key's folders empty
``launch.py``             the command's side: start a worker, send the cells, then each exercise's inputs
``command.py``            ``python -m attn_edu.grade``: notebooks in, JSON and CSV out
``gradescope.py``         the command's report as Gradescope's ``results.json`` (``--format gradescope``)
``generate.py``           ``python -m attn_edu.exercises build``: ``solutions/`` to ``exercises/``
``nbgrader.py``           ``python -m attn_edu.grading.nbgrader OUTDIR``: ``solutions/`` to an nbgrader course
========================= ================================================================================
"""

from attn_edu.grading.notebook import check, hint
from attn_edu.grading.result import CheckResult, Hint, Status

__all__ = ["CheckResult", "Hint", "Status", "check", "hint"]
