"""Models from the Hugging Face Hub: ``loader`` (``download_model``, the Hub events),
``cache`` (the Hub cache on disk as Ember reads and writes it) and ``names`` (the ``hf://``
sources and the checks of repository ids, file names and revisions).
"""
