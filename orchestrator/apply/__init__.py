"""Applying a release: a Profile, its Plan and a cluster in; the objects applied, watched,
health-gated and recorded (or the last good release restored) and an Outcome, the one exit code,
out. Also uninstall, the GitOps gate and the read-only views of a release.
"""
