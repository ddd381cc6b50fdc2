"""Policy: a Profile and the InferencePolicies of its namespace in; the violations out, as Python
checks for the controller and as the CEL of a ValidatingAdmissionPolicy for admission.
"""
