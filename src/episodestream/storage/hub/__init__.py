"""The Hugging Face Hub reader (``hf://``): ``_reader.py`` reads a repository's files at a
pinned commit through the HTTP reader; ``_api.py`` holds what is asked of the Hub's API
(commits, tokens, endpoint), through ``huggingface_hub`` imported only when needed.

What the layers above use is exported by ``episodestream.storage``.
"""
