"""The built-in demo corpus.

Needs: nothing but the running Python. Writes: resources/demo/corpus.jsonl,
~3,000 stdlib docstrings (id = qualified name). Used when input.path is null.
"""


rule build_demo_corpus:
    output:
        plan.DEMO_CORPUS,
    log:
        "logs/corpus/build_demo_corpus.log",
    conda:
        "../envs/core.yaml"
    params:
        max_docs=config["demo"]["max_docs"],
        min_words=config["demo"]["min_words"],
    script:
        "../scripts/build_demo_corpus.py"
