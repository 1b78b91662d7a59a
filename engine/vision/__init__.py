"""Images in the conversation (issue 44): reading what the user gives into upright 8-bit RGB or one line saying why
not (image_input.py), keeping the files content-addressed beside the history (image_store.py), loading a
vision-language model folder (vlm.py) and a turn with images (turn.py: the language part on the fast path;
layouts.py: the prefill's positions and mask for Gemma 3 and Qwen-VL; plain_turn.py: transformers' own forward for a
language model the fast path does not compute)."""
