"""Function-preserving permutations of a model's channels, the layout capability's base: which
axes move together (`spaces`) and moving them (`apply`)."""
