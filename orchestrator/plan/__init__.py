"""Planning: a Profile, the catalog's model and GPU facts and the cluster's nodes in; the VRAM plan
and its verdict, the layout across GPUs and nodes, and the preflight's eligible nodes and rollout
strategy out, with every check an apply makes against the cluster before its first write.
"""
