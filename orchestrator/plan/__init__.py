"""Planning: a Profile, the catalog's model and GPU facts and the cluster's nodes in; the VRAM plan
and its verdict, the layout across GPUs and nodes, and the preflight's eligible nodes out.
"""
