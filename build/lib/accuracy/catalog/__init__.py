"""What is measured: the op registry (one declarative record per op) and the op families in ops/."""
