"""Images in the conversation (issue 44): reading what the user gives into upright 8-bit RGB or one line saying why
not (image_input.py), and keeping the files content-addressed beside the history (image_store.py). The vision
families, their processors and the vision towers are not built yet."""
