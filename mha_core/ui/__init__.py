"""The dashboard's figures (viz) and ipywidgets panels (widgets). Imports matplotlib and ipywidgets."""
