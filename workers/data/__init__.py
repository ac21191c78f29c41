"""Text -> token shards -> batches: corpora (`corpus`), tokenizers (`tokenizer`), preparations and
the batch sampler (`shards`), and the prepare job (`prepare`)."""
