"""Rendering: a Profile and its Plan in; Kubernetes objects (the Jinja2 templates of
orchestrator/manifests/) or the Helm chart's values out.

``resolve`` turns them into one ``chart_values.Values``; ``manifests`` places those values into objects.
"""
