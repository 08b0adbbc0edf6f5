"""The concept questions, one module per notebook, named like the check module of its exercises."""
