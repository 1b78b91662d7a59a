"""The Models window's parts (``app.widgets.models_window`` puts them together): the installed models
(``installed_tab``), the Hub search (``search_tab``), a model's page (``model_page``) with its fit estimate
(``fit_panel``), the download progress (``download_panel``) and their tables (``tables``).

Plain widgets over ``engine.library``: every Hub call runs off the GUI thread (``app.runtime.background``) and passes
the window's ``allow_downloads`` (off unless the user turned it on), so nothing here touches the network by itself.
"""
