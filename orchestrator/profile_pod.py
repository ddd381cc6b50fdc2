"""The pod-level parts a profile may add to the engine container: env, envFrom, volumes and mounts.

Each is a safe subset of the Kubernetes field of the same name, and each is checked against what
deployctl itself puts into the pod (its env variables, its volumes and their mount paths), so a
profile can add to the pod spec but never silently override what another profile field controls.
"""

from __future__ import annotations
