"""The gate: a release's endpoint and the profile's SLOs in; a smoke benchmark's measured metrics
and the ordered verdict (Pass < Inconclusive < Error < Fail) out.

``bench`` runs the load (``workload`` says what to send, ``stream`` times each request,
``metrics`` and ``bench_report`` sum it up); ``verdict`` judges the metrics against the SLOs.
"""
