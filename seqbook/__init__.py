"""seqbook: the companion package of an executable book on sequence models.

One module per concept; every chapter of the book imports its implementation from here.
"""

__version__ = "0.1.0"
