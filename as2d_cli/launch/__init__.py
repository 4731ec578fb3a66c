"""The host's side of the native runner: starting it here over pipes or on a device in
file mode (:mod:`.host`), and how a device gets the runner's code and models
(:mod:`.payload`: the launch strategies, the runner payload, the pushed corpus windows).
Nothing here runs on a phone; what does is :mod:`native` and the files
:data:`as2d_cli.bundle.recipe.PROJECT_PACKAGES` names."""
