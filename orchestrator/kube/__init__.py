"""Cluster access: the only place deployctl imports the official ``kubernetes`` client.

Everything above this package sees plain dicts of Kubernetes objects and our own errors.
``kinds`` is the one kind table (REST paths, a release's kinds, the access they need);
``status`` reads the few fields deployctl judges of Pods, Deployments, ReplicaSets and RayClusters.
"""

from orchestrator.kube.client import Kube, WatchEvent, connect
from orchestrator.kube.kinds import Ref
from orchestrator.kube.kubeconfig import context_namespace
from orchestrator.kube.portforward import PortForwarder

__all__ = ["Kube", "PortForwarder", "Ref", "WatchEvent", "connect", "context_namespace"]
