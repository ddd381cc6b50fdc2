"""Cluster access: kinds, names and plain dicts of Kubernetes objects in; REST reads, watches,
server-side apply and port-forwards against the API server out, with our own errors. The only
place deployctl imports the official ``kubernetes`` client.
``kinds`` is the one kind table (REST paths, a release's kinds, the access they need);
``status`` reads the few fields deployctl judges of Pods, Deployments, ReplicaSets and RayClusters.
"""

from orchestrator.kube.client import Kube, WatchEvent, connect
from orchestrator.kube.kinds import Ref
from orchestrator.kube.kubeconfig import context_namespace
from orchestrator.kube.portforward import PortForwarder

__all__ = ["Kube", "PortForwarder", "Ref", "WatchEvent", "connect", "context_namespace"]
