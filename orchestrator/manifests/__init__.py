"""Jinja2 templates of the Kubernetes objects deployctl renders (package data, no code).

Shipped in the wheel as ``orchestrator.manifests`` so ``orchestrator.render.manifests`` finds them with
``importlib.resources``; ``manifests/rbac/`` holds the permissions deployctl itself needs.
"""
