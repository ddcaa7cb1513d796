"""The agent's settings: the config file and flags (`settings`), the config keys (`keys`) and their value
parsers (`values`), and the kubelet's own configuration as their default (`kubelet`). Composes the
features' config sections; imports the core and the features."""
