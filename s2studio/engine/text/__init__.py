"""The text side: tokenizer, the 11-row prompt, splitting a script into segments."""
