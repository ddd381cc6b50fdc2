"""The catalog: a model or GPU name in; the model's architecture or the GPU's facts, from
orchestrator/data/, out.
"""
