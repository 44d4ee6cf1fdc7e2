"""Ranking data: the in-memory layout (``dataset``), the LETOR/SVMlight reader and writer
(``svmlight``) and the query-wise feature views (``normalization``)."""
