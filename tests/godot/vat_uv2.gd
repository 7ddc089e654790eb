# Reads back the first mesh of an imported scene as Godot stores it: godot3-server --path PROJECT -s vat_uv2.gd
# res://SCENE OUT.bin writes, little endian, the surface count, then per surface its format flags, its
# vertex count and per vertex x, y, z, UV2.x, UV2.y as 32-bit floats (UV2 decompressed from Godot's half
# floats when the format has Mesh.ARRAY_COMPRESS_TEX_UV2).
extends SceneTree


func _find_mesh(node):
	if node is MeshInstance:
		return node
	for child in node.get_children():
		var found = _find_mesh(child)
		if found != null:
			return found
	return null


func _init():
	var args = OS.get_cmdline_args()
	var scene = load(args[args.size() - 2]).instance()
	var mesh = _find_mesh(scene).mesh
	var out = File.new()
	out.open(args[args.size() - 1], File.WRITE)
	out.store_32(mesh.get_surface_count())
	for s in range(mesh.get_surface_count()):
		var arrays = mesh.surface_get_arrays(s)
		var vertices = arrays[Mesh.ARRAY_VERTEX]
		var uv2 = arrays[Mesh.ARRAY_TEX_UV2]
		out.store_32(mesh.surface_get_format(s))
		out.store_32(vertices.size())
		for i in range(vertices.size()):
			out.store_float(vertices[i].x)
			out.store_float(vertices[i].y)
			out.store_float(vertices[i].z)
			out.store_float(uv2[i].x)
			out.store_float(uv2[i].y)
	out.close()
	scene.free()
	quit()
