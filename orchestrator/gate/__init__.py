"""The gate: a release's endpoint and the profile's SLOs in; a smoke benchmark's measured metrics
and the ordered verdict (Pass < Inconclusive < Error < Fail) out.
"""
