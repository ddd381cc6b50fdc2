"""Release records: what a command did in; immutable, hash-chained, optionally signed records
(ConfigMaps), and their audit, export, trust and purge out.
"""
