# godot3-server --path PROJECT --script res://sample_loop.gd: plays the imported scene's looping animation
# with AnimationPlayer.advance, as a game's process loop does, and prints one JSON line per sample. Numbers
# that must keep every digit (positions, times) go out as base64 of little-endian float64s: Godot 3's JSON
# prints six decimals.
# The settings come from res://sample.json: the scene, the time steps and how many samples of each.
# Godot 3 blends blend shapes on the GPU, so the morphed positions are summed here the way its
# BLEND_SHAPE_MODE_NORMALIZED meshes are: base * (1 - sum w) + sum w * shape (the importer's shapes are
# absolute positions), then taken to the scene's space with the MeshInstance's global transform; the normals
# the same way (the shapes' normals are absolute too), normalized, in the mesh's space.
extends SceneTree


func _find(node, kind):
	if node.is_class(kind):
		return node
	for child in node.get_children():
		var found = _find(child, kind)
		if found != null:
			return found
	return null


func _exact(values):
	var buffer = StreamPeerBuffer.new()
	for value in values:
		buffer.put_double(value)
	return Marshalls.raw_to_base64(buffer.data_array)


func _vectors(array):
	var buffer = StreamPeerBuffer.new()
	for v in array:
		buffer.put_double(v.x)
		buffer.put_double(v.y)
		buffer.put_double(v.z)
	return Marshalls.raw_to_base64(buffer.data_array)


func _blend(base, shapes, weights, total):
	var out = []
	for v in range(base.size()):
		var p = base[v] * (1.0 - total)
		for i in range(shapes.size()):
			if weights[i] != 0.0:
				p += shapes[i][v] * weights[i]
		out.append(p)
	return out


func _positions(instance, mesh, base, shapes, normals, shape_normals, xform):
	var weights = []
	var total = 0.0
	for i in range(mesh.get_blend_shape_count()):
		var w = instance.get("blend_shapes/" + mesh.get_blend_shape_name(i))
		weights.append(w)
		total += w
	var out = []
	for p in _blend(base, shapes, weights, total):
		out.append(xform.xform(p))
	var sample = {"weights": _exact(weights), "positions": _vectors(out)}
	if normals != null:
		var shown = []
		for n in _blend(normals, shape_normals, weights, total):
			shown.append(n.normalized())
		sample["normals"] = _vectors(shown)
	return sample


func _initialize():
	var file = File.new()
	file.open("res://sample.json", File.READ)
	var settings = parse_json(file.get_as_text())
	file.close()
	var scene = load(settings["scene"]).instance()
	root.add_child(scene)
	var player = _find(scene, "AnimationPlayer")
	var instance = _find(scene, "MeshInstance")
	var mesh = instance.mesh
	var names = player.get_animation_list()
	var animation = player.get_animation(names[0])
	var arrays = mesh.surface_get_arrays(0)
	var base = arrays[Mesh.ARRAY_VERTEX]
	var shapes = []
	var shape_normals = []
	for shape in mesh.surface_get_blend_shape_arrays(0):
		shapes.append(shape[Mesh.ARRAY_VERTEX])
		shape_normals.append(shape[Mesh.ARRAY_NORMAL])
	var xform = instance.global_transform
	print(to_json({"animations": names, "length": animation.length, "loop": animation.loop,
		"blend_shape_mode": mesh.blend_shape_mode, "blend_shapes": mesh.get_blend_shape_count(),
		"rest": _vectors(base), "normals": arrays[Mesh.ARRAY_NORMAL] != null}))
	for run in settings["runs"]:
		player.play(names[0])
		player.seek(0.0, true)
		for k in range(run["samples"]):
			var sample = _positions(instance, mesh, base, shapes, arrays[Mesh.ARRAY_NORMAL], shape_normals, xform)
			sample["run"] = run["name"]
			sample["time"] = _exact([player.current_animation_position])
			print(to_json(sample))
			player.advance(run["step"])
		player.stop()
	quit()
