"""One reader module per corpus format, each returning a :class:`~vsekit.data.corpus_types.Corpus`.

A new format is a module here with a ``load_<format>`` function; :func:`vsekit.data.corpus.load_corpus`
learns to recognise it (folder layout, file extension or first line) in ``data/corpus.py``.
"""
