"""The replicated log: the only package that imports or reaches into pysyncobj.

The server and the command line see one small interface, `Replica`
(replica.py): submit an encoded entry and learn what applying it did
(`haqueue.core.effects.Applied`), ask whether this node leads and in which
term, whether its read lease holds, its status, and hear of leadership
changes and fatal errors through two callbacks. Behind it, raft_node.py
subclasses pysyncobj (each change and its reason in its docstring) and
pysyncobj_patches.py installs what is patched inside pysyncobj, for the one
version it was written against.

Importing this package imports no pysyncobj: modules that need it import
pysyncobj_patches first (which also undoes what pysyncobj's import does to
the socket module).
"""
