"""The detector's labelled corpus (issue 26): every pitfall of the clone/detach article and its readers,
each with its fix and its innocent look-alikes. ``cases.py`` is plain data (no torch): the tests and
``python -m app.bench detector`` read it; ``oracle.py`` checks each label in plain torch."""
