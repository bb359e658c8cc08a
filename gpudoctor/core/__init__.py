"""The lowest layer: the report's types, the finding codes and their words, the exit codes and
errors, the Xid catalogue and the kernel log's Xid records, and small helpers over numbers and
foreign text. Standard library only; imports nothing else of gpudoctor."""
