"""The controller: InferenceProfile objects watched in a cluster in; for each new generation the
apply sequence run, and status conditions and events written back out.
"""
