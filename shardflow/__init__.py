"""shardflow: chunked GPU batch NLP over large text corpora."""

__version__ = "0.1.0"
