"""The checks behind the graded exercises, one module per notebook's concept.

Each module follows one recipe: cases (random inputs, including the hard ones), the reference (a call into
the library's own function), named wrong versions, properties, diagnoses and tiered hints, and at its end
a tuple ``EXERCISES`` that :mod:`attn_edu.grading.registry` collects. Nothing registers on import.
"""
