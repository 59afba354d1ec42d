"""Image recipes: a derivative serving image = pinned base + verified overlay files (docs/images.md)."""

from sparkctl.recipes.schema import LoadedRecipe, Recipe, RecipeError, find_recipe, load_recipe

__all__ = ["LoadedRecipe", "Recipe", "RecipeError", "find_recipe", "load_recipe"]
