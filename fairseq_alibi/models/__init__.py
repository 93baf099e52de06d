"""The fairseq side: the models, their attention layers and the criterion that plugin.py registers
(factory.py reads and checks a model's options once, when it is built). Importing this package
imports no fairseq; its modules other than factory.py do."""
