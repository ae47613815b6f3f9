// placeholder: filled in by its component's work
