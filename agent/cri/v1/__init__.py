"""Generated CRI stubs (runtime.v1 subset). Do not edit: run `python proto/generate.py`.

Only `agent.cri` may import this package; everything else uses `agent.cri.types`.
"""
