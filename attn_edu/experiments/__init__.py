"""The experiments: models trained here, one module per experiment, each shipped with its weights or trained
in a notebook.

    text_gpt               two character-level language models of the Python documentation (weights shipped)
    multitask              copy, reverse and sort, told by a prefix (T5) and by examples (Llama) (weights shipped)
    rope_extension         a RoPE model trained on 64 characters, read on 256 (weights shipped)
    interp_seeds           notebook 13's attention-only model from three seeds (weights, findings, probes shipped)
    minilm_heads           notebook 13's sweeps over all-MiniLM-L6-v2's heads (measurements shipped)
    norm_placement         notebook 08's toy decoders, pre-norm vs post-norm (its optional runs' record shipped)
    length_extrapolation   a lag task trained at one length, tested at four times it (trained in notebook 06)
    alignment              a tiny translator whose attention aligns two sentences (notebook 01; record shipped)
    previous_token         separate vs tied query and key maps, taught to read the previous token (notebook 02)
    induction_heads        notebook 05's two-layer attention-only model that grows induction heads (runs shipped)
    finetune               a pretrained encoder fine-tuned against its frozen features (its run's record shipped)
    scaling_runs           notebook 03's lookup head trained at three score scales and with QK-norm (record shipped)
    key_selection          notebook 11's text GPT reading only selected keys, its losses (record shipped)
    unmasked_decoder       notebook 04's small GPT trained with and without its causal mask (record shipped)

The wing is a floor above the architectures and the interop: it uses the models, the training loop and the
data, and nothing below it imports it (the benchmarks, :mod:`attn_edu.bench`, may). :mod:`.shipped` is the one
store of the shipped weights (``NAME.safetensors`` and its record ``NAME.json`` in ``attn_edu/weights/``), and
:mod:`.cli` the one shape of their commands, ``python -m attn_edu.experiments.NAME train|report``.
"""
