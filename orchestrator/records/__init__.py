"""Release records: what a command did in; immutable, hash-chained, optionally signed records
(ConfigMaps), and their audit, export, trust and purge out.

``writer`` appends a record, ``releases`` reads them back, ``revisions`` says what the history means
(live, rollback target); ``audit``, ``trust`` and ``purge`` check, vouch for and remove them.
"""
