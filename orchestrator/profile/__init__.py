"""The profile: a YAML file (and --set overrides) in; a validated Profile, or errors naming field
and line, out; and the profile's JSON Schema. One module per section (weights, placement, engine,
pod, the gate's SLOs, API key and endpoint), assembled by ``model``.
"""
