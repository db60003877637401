"""Loading a model or a job into the page (config.json, the Hub, framework and RL configs) and exporting one."""
